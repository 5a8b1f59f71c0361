// Exception types thrown by the audio core. Each maps to one Python exception in
// bindings.cpp; every message already starts with the file (or buffer) name, so it can be
// shown as is, and load_many can store it as the item's error text.
#pragma once

#include <stdexcept>
#include <string>

namespace sdscore {

// Bad, unsupported or unreadable audio -> ValueError.
class InvalidAudioError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The bytes are not a RIFF/RF64 WAVE container (maybe FLAC/OGG/MP3), or a WAVE whose codec the
// core does not decode (mu-law, A-law, ADPCM) -> ValueError. load_many reports these as
// `not_wav` so the Python layer can try another decoder.
class NotWavError : public InvalidAudioError {
 public:
  using InvalidAudioError::InvalidAudioError;
};

// The path does not exist -> FileNotFoundError.
class FileMissingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The path is a directory -> IsADirectoryError.
class IsDirectoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sdscore
