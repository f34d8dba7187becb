#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "sender/transport/file_transport.h"
#include "sender/transport/sandbox_events.h"
#include "sender/transport/transport.h"

namespace mailroom {

// The sandbox transport's own settings.
struct SandboxSettings {
  std::string domain = "sandbox.mailroom.test";  // the simulator's recipients' domain
  std::string dir;                               // also write each accepted message here
  std::string feedback_url;     // the collector's /feedback/sandbox, "" for no events
  std::string feedback_secret;  // its whsec_ secret(s) (secret)
  absl::Duration event_delay = absl::Seconds(1);  // before an email's first event
};

// A provider simulator for testing bounce handling end to end: it sends no email anywhere. It
// answers each Send as a provider does (a provider message id, or a refusal) and reports what
// became of the email the way a provider's webhook does, to the collector's /feedback/sandbox
// path (SandboxEventPoster), so that bounces, complaints and deliveries travel the same feedback
// path as a real provider's. The recipient's local part at the simulator domain
// (SandboxSettings::domain, compared without case) picks what happens:
//   delivered@   accepted; a delivery event
//   bounce@      accepted; a permanent bounce event (the collector suppresses the address)
//   softbounce@  accepted; a transient bounce event (counted towards the soft-bounce limit)
//   complaint@   accepted; a delivery event, then a complaint event
//   delayed@     accepted; a delay event (the collector ignores it), then a delivery event
//   suppressed@  refused at once as a provider refuses an address on its suppression list:
//                RecipientRejected (the job fails and the address is suppressed); no event
// Any other recipient, at the simulator domain or not, is accepted with a delivery event: the
// sandbox is a sink, and real addresses never receive anything from it. Without a feedback URL
// no event is posted. With a directory each accepted message is also written there as the file
// transport writes it. Thread-safe.
class SandboxTransport : public Transport {
 public:
  // What a recipient asks the simulator for.
  enum class Scenario { kDelivered, kBounce, kSoftBounce, kComplaint, kDelayed, kSuppressed };

  // InvalidArgument naming MAILROOM_SANDBOX_FEEDBACK_SECRET when the secret does not parse (or
  // is missing with a feedback URL); FailedPrecondition naming MAILROOM_SANDBOX_DIR when the
  // directory cannot be made. `clock` paces the events (not owned; outlives the transport).
  static absl::StatusOr<std::unique_ptr<SandboxTransport>> Create(const TransportConfig& config,
                                                                  Clock* clock);

  absl::StatusOr<SendResult> Send(const OutgoingEmail& email) override;
  int Concurrency() const override { return concurrency_; }
  // The provider's name: its feedback path (/feedback/sandbox) and the deliveries' provider.
  std::string Name() const override { return "sandbox"; }

  // The scenario of `to` for simulator domain `domain`.
  static Scenario ScenarioOf(absl::string_view to, absl::string_view domain);
  // The events an accepted email of `scenario` reports, in order: delivery-report JSON bodies
  // (docs/configuration.md, "Delivery reports") naming `provider_id`, the job, `group` and the
  // recipient; webhook ids "sbx_<provider id>_<kind>".
  static std::vector<SandboxEvent> EventsOf(Scenario scenario, const OutgoingEmail& email,
                                            absl::string_view provider_id, absl::string_view group);
  // The events still being posted (tests): see SandboxEventPoster::WaitIdle. True without a
  // feedback URL.
  bool WaitEventsPosted(absl::Duration timeout);

 private:
  SandboxTransport(const TransportConfig& config, std::unique_ptr<FileTransport> file,
                   std::unique_ptr<SandboxEventPoster> poster);
  std::string NewProviderId();

  const std::string domain_, group_;
  const int concurrency_;
  const std::unique_ptr<FileTransport> file_;         // null without a directory
  const std::unique_ptr<SandboxEventPoster> poster_;  // null without a feedback URL
  absl::Mutex mu_;
  absl::BitGen gen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mailroom
