// POSIX whole-file reader; see file_reader.hpp.
#include "audio/file_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "audio/audio_errors.hpp"

namespace sdscore {
namespace {

// Closes the descriptor on every exit path.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail_errno(const std::string& path, int err) {
  if (err == ENOENT) throw FileMissingError(path + ": no such file");
  if (err == EISDIR) throw IsDirectoryError(path + ": is a directory");
  throw InvalidAudioError(path + ": " + std::strerror(err));
}

}  // namespace

void ByteBuffer::reserve(size_t n) {
  if (n <= capacity_) return;
  const size_t grown = capacity_ + capacity_ / 2;
  const size_t cap = n > grown ? n : grown;
  std::unique_ptr<uint8_t[]> bigger(new uint8_t[cap]);
  if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  capacity_ = cap;
}

uint64_t read_file(const std::string& path, ByteBuffer& out, size_t max_bytes) {
  out.set_size(0);
  // O_NONBLOCK: opening a FIFO must not hang; it is rejected below as not a regular file.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) fail_errno(path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, errno);
  if (S_ISDIR(st.st_mode)) throw IsDirectoryError(path + ": is a directory");
  if (!S_ISREG(st.st_mode)) throw InvalidAudioError(path + ": not a regular file");

  // st_size is only a hint: read until EOF in case the file changes meanwhile. The +1 lets a
  // file of the expected size finish with one more read() that returns 0.
  const auto expected = static_cast<uint64_t>(st.st_size);
  out.reserve(static_cast<size_t>(std::min<uint64_t>(expected + 1, max_bytes)));
  while (out.size() < max_bytes) {
    if (out.size() == out.capacity()) out.reserve(out.capacity() + 65536);
    const size_t want = std::min(out.capacity(), max_bytes) - out.size();
    const ssize_t got = ::read(fd.get(), out.data() + out.size(), want);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, errno);
    }
    if (got == 0) return out.size();  // EOF: the file is exactly what was read
    out.set_size(out.size() + static_cast<size_t>(got));
  }
  return std::max<uint64_t>(expected, out.size());
}

}  // namespace sdscore
