// Whole-file reads into a reusable byte buffer, with errors that name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sdscore {

// Growable, uninitialised byte storage; reused across files by a worker thread so that a
// batch does not zero-fill or reallocate a buffer per file.
class ByteBuffer {
 public:
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // Makes room for `n` bytes, keeping the first `size()` bytes.
  void reserve(size_t n);
  void set_size(size_t n) { size_ = n; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

// Reads the regular file at `path` into `out`, at most `max_bytes` of it, and returns the
// file size (exact when the whole file was read). Throws FileMissingError
// ("path: no such file"), IsDirectoryError ("path: is a directory") or InvalidAudioError
// (other errno text, or not a regular file).
uint64_t read_file(const std::string& path, ByteBuffer& out, size_t max_bytes = SIZE_MAX);

}  // namespace sdscore
