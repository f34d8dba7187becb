#pragma once

#include <atomic>
#include <string>

#include "common/clock.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The file transport's own settings.
struct FileSettings {
  std::string dir = "./outbox";  // MAILROOM_FILE_DIR: where the .eml files are written
};

// Development transport: writes each message to `<dir>/<unix-ms>-<message-id>.eml`, atomically
// (temporary file + rename), so a reader never sees half a message. A file of that name already
// there is never replaced: the copy is `<unix-ms>-<message-id>-<n>.eml` (every try of one job
// is the same message under the same id).
class FileTransport : public Transport {
 public:
  // `clock` names the files (not owned; outlives the transport).
  FileTransport(std::string dir, int concurrency, Clock* clock = RealClock::Get())
      : dir_(std::move(dir)), concurrency_(concurrency), clock_(clock) {}
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return concurrency_; }
  std::string Name() const override { return "file"; }

 private:
  const std::string dir_;
  const int concurrency_;
  Clock* const clock_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace mailroom
