// base/mapped_file.h: a read-only memory-mapped file.
//
// Model weights are used in place from the mapping (zero copy); the kernel pages them in on
// first touch. Not for writing: writers stream through stdio.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace paddock {

class MappedFile {
 public:
  // Maps `path` read-only. Throws Error naming the path and the OS reason on failure.
  // populate: pre-fault the whole mapping (the first forward pass then pays no page faults);
  // off where only part of the file will be read (a pipeline stage's layers, dist/pipeline.h).
  static std::shared_ptr<const MappedFile> Open(const std::string& path, bool populate = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Drops the whole pages inside [p, p + n) of a read-only mapping from this process (they are
// re-read from the file if touched again). For weights copied elsewhere at load.
void ReleasePages(const void* p, size_t n);

// Reads a whole (small) file into a string; throws Error on failure.
std::string ReadFileToString(const std::string& path);

}  // namespace paddock
