#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "sender/curl_util.h"
#include "sender/transport.h"

namespace mailroom {

// SMTP through libcurl: smtp:// with STARTTLS (required unless plain is explicitly allowed) or
// smtps://, optional AUTH, `connections` persistent connections (one curl handle each, reused
// across messages). Send blocks until a connection is free.
class SmtpTransport : public Transport {
 public:
  explicit SmtpTransport(const TransportConfig& config);
  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return static_cast<int>(slots_.size()); }
  std::string Name() const override { return "smtp"; }

 private:
  struct Slot {
    CurlHandle handle;
    bool busy = false;
  };
  Slot* Acquire();
  void Release(Slot* slot);

  const TransportConfig config_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace mailroom
