#include "sender/transport/sandbox_transport.h"

#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sender/transport/http_transport.h"

namespace mailroom {
namespace {

// A report of `type` about `email` (ParseHttpReport's shape on the collector's side).
nlohmann::json Report(const char* type, const OutgoingEmail& email, absl::string_view provider_id,
                      absl::string_view group) {
  return {{"type", type},
          {"message_id", std::string(provider_id)},
          // A string: job ids are 64-bit, as the http transport sends them.
          {"job_id", absl::StrCat(email.content.job_id)},
          {"group", std::string(group)},
          {"recipients", {email.to_address}}};
}

SandboxEvent Event(absl::string_view provider_id, const char* kind, const nlohmann::json& body) {
  return {absl::StrCat("sbx_", provider_id, "_", kind), body.dump()};
}

}  // namespace

absl::StatusOr<std::unique_ptr<SandboxTransport>> SandboxTransport::Create(
    const TransportConfig& config, Clock* clock) {
  const SandboxSettings& sandbox = config.Get<SandboxSettings>();
  std::unique_ptr<FileTransport> file;
  if (!sandbox.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(sandbox.dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("MAILROOM_SANDBOX_DIR: cannot create \"",
                                                        sandbox.dir, "\": ", ec.message()));
    }
    file = std::make_unique<FileTransport>(sandbox.dir, config.connections);
  }
  std::unique_ptr<SandboxEventPoster> poster;
  if (!sandbox.feedback_url.empty()) {
    auto keys = HttpTransport::ParseSecrets(sandbox.feedback_secret,
                                            "MAILROOM_SANDBOX_FEEDBACK_SECRET", "sandbox");
    if (!keys.ok()) return keys.status();
    SandboxPosterOptions options;
    options.url = sandbox.feedback_url;
    options.keys = *std::move(keys);
    options.delay = sandbox.event_delay;
    options.connect_timeout = config.connect_timeout;
    options.timeout = config.timeout;
    poster = std::make_unique<SandboxEventPoster>(std::move(options), clock);
  }
  return std::unique_ptr<SandboxTransport>(
      new SandboxTransport(config, std::move(file), std::move(poster)));
}

SandboxTransport::SandboxTransport(const TransportConfig& config,
                                   std::unique_ptr<FileTransport> file,
                                   std::unique_ptr<SandboxEventPoster> poster)
    : domain_(absl::AsciiStrToLower(config.Get<SandboxSettings>().domain)), group_(config.group),
      concurrency_(config.connections), file_(std::move(file)), poster_(std::move(poster)) {}

SandboxTransport::Scenario SandboxTransport::ScenarioOf(absl::string_view to,
                                                        absl::string_view domain) {
  const size_t at = to.rfind('@');
  if (at == absl::string_view::npos || !absl::EqualsIgnoreCase(to.substr(at + 1), domain)) {
    return Scenario::kDelivered;
  }
  const std::string local = absl::AsciiStrToLower(to.substr(0, at));
  if (local == "bounce") return Scenario::kBounce;
  if (local == "softbounce") return Scenario::kSoftBounce;
  if (local == "complaint") return Scenario::kComplaint;
  if (local == "delayed") return Scenario::kDelayed;
  if (local == "suppressed") return Scenario::kSuppressed;
  return Scenario::kDelivered;
}

std::vector<SandboxEvent> SandboxTransport::EventsOf(Scenario scenario, const OutgoingEmail& email,
                                                     absl::string_view provider_id,
                                                     absl::string_view group) {
  nlohmann::json delivered = Report("email.delivered", email, provider_id, group);
  switch (scenario) {
    case Scenario::kBounce: {
      nlohmann::json b = Report("email.bounced", email, provider_id, group);
      b["bounce_type"] = "permanent";
      b["reason"] = "sandbox: 550 5.1.1 mailbox does not exist (simulated)";
      return {Event(provider_id, "bounce", b)};
    }
    case Scenario::kSoftBounce: {
      nlohmann::json b = Report("email.bounced", email, provider_id, group);
      b["bounce_type"] = "transient";
      b["reason"] = "sandbox: 452 4.2.2 mailbox full (simulated)";
      return {Event(provider_id, "softbounce", b)};
    }
    case Scenario::kComplaint: {
      nlohmann::json c = Report("email.complained", email, provider_id, group);
      c["reason"] = "abuse";
      return {Event(provider_id, "delivered", delivered), Event(provider_id, "complaint", c)};
    }
    case Scenario::kDelayed:
      return {Event(provider_id, "delayed",
                    Report("email.delivery_delayed", email, provider_id, group)),
              Event(provider_id, "delivered", delivered)};
    case Scenario::kSuppressed: return {};
    case Scenario::kDelivered: break;
  }
  return {Event(provider_id, "delivered", delivered)};
}

std::string SandboxTransport::NewProviderId() {
  absl::MutexLock lock(&mu_);
  return absl::StrFormat("sbx-%016x%016x", absl::Uniform<uint64_t>(gen_),
                         absl::Uniform<uint64_t>(gen_));
}

absl::StatusOr<SendResult> SandboxTransport::Send(const OutgoingEmail& email) {
  const Scenario scenario = ScenarioOf(email.to_address, domain_);
  if (scenario == Scenario::kSuppressed) {
    // As Postmark's 406 "inactive recipient": a permanent refusal of this address.
    return RecipientRejected(
        "sandbox 406: the recipient is on the sandbox's suppression list (suppressed@)");
  }
  if (file_ != nullptr) {
    auto written = file_->Send(email);
    if (!written.ok()) return written.status();
  }
  const std::string id = NewProviderId();
  if (poster_ != nullptr) {
    // Each next event of an email a little later, so that they arrive in order.
    absl::Duration extra = absl::ZeroDuration();
    for (SandboxEvent& e : EventsOf(scenario, email, id, group_)) {
      poster_->Post(std::move(e), extra);
      extra += absl::Milliseconds(100);
    }
  }
  return SendResult{id, id};
}

bool SandboxTransport::WaitEventsPosted(absl::Duration timeout) {
  return poster_ == nullptr || poster_->WaitIdle(timeout);
}

}  // namespace mailroom
