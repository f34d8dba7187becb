#include "sender/transport/file_transport.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace mailroom {
namespace {

// Moves `from` to `to` unless `to` exists (then false, *err EEXIST): renameat2's
// RENAME_NOREPLACE, or, on a file system or kernel without it (EINVAL, ENOSYS, EOPNOTSUPP: NFS,
// some FUSE mounts, a seccomp filter), a hard
// link then the temporary's unlink, which refuses an existing name the same way.
bool PlaceNoReplace(const std::string& from, const std::string& to, int* err) {
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  *err = errno;
  if (*err != EINVAL && *err != ENOSYS && *err != EOPNOTSUPP) return false;
  if (link(from.c_str(), to.c_str()) != 0) {
    *err = errno;
    return false;
  }
  unlink(from.c_str());
  return true;
}

}  // namespace

absl::StatusOr<SendResult> FileTransport::Send(const OutgoingEmail& email) {
  // Keep only file-name-safe characters of the message id.
  std::string id;
  for (char c : email.message_id) {
    if (isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') id += c;
  }
  const std::string name = absl::StrCat(absl::ToUnixMillis(clock_->Now()), "-", id, ".eml");
  const std::string path = absl::StrCat(dir_, "/", name);
  const std::string tmp = absl::StrCat(dir_, "/.", name, ".", counter_.fetch_add(1), ".tmp");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  }
  size_t off = 0;
  while (off < email.mime.size()) {
    ssize_t n = write(fd, email.mime.data() + off, email.mime.size() - off);
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", strerror(err)));
    }
    off += static_cast<size_t>(n);
  }
  int err = 0;
  if (fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot store ", path, ": ", strerror(err)));
  }
  // Every try of a job is the same message under the same id: a second copy written in the
  // same millisecond (by this process or another) gets a suffix and never replaces the first.
  std::string stored = path;
  for (int n = 1; !PlaceNoReplace(tmp, stored, &err); ++n) {
    if (err != EEXIST || n > 1000) {
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot store ", stored, ": ", strerror(err)));
    }
    stored = absl::StrCat(dir_, "/", absl::ToUnixMillis(clock_->Now()), "-", id, "-", n, ".eml");
  }
  return SendResult{stored};
}

}  // namespace mailroom
