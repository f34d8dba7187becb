#include "sender/transport/transport_factory.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "sender/transport/file_transport.h"
#include "sender/transport/http_transport.h"
#include "sender/transport/mailgun_transport.h"
#include "sender/transport/postmark_transport.h"
#include "sender/transport/resend_transport.h"
#include "sender/transport/sandbox_transport.h"
#include "sender/transport/sendgrid_transport.h"
#include "sender/transport/ses_transport.h"
#include "sender/transport/smtp_transport.h"

namespace mailroom {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config) {
  if (config.kind == "file") {
    std::error_code ec;
    std::filesystem::create_directories(config.file_dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("MAILROOM_FILE_DIR: cannot create \"",
                                                        config.file_dir, "\": ", ec.message()));
    }
    return std::unique_ptr<Transport>(new FileTransport(config.file_dir, config.connections));
  }
  if (config.kind == "smtp") return std::unique_ptr<Transport>(new SmtpTransport(config));
  if (config.kind == "ses") return std::unique_ptr<Transport>(new SesTransport(config));
  if (config.kind == "http") {
    auto http = HttpTransport::Create(config);
    if (!http.ok()) return http.status();
    return std::unique_ptr<Transport>(*std::move(http));
  }
  if (config.kind == "postmark") return std::unique_ptr<Transport>(new PostmarkTransport(config));
  if (config.kind == "sendgrid") return std::unique_ptr<Transport>(new SendgridTransport(config));
  if (config.kind == "mailgun") return std::unique_ptr<Transport>(new MailgunTransport(config));
  if (config.kind == "resend") return std::unique_ptr<Transport>(new ResendTransport(config));
  if (config.kind == "sandbox") {
    auto sandbox = SandboxTransport::Create(config, RealClock::Get());
    if (!sandbox.ok()) return sandbox.status();
    return std::unique_ptr<Transport>(*std::move(sandbox));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("MAILROOM_TRANSPORT: unknown \"", config.kind, "\""));
}

}  // namespace mailroom
