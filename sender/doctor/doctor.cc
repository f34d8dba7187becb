#include "sender/doctor/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/http/curl_handle.h"
#include "grpcpp/grpcpp.h"
#include "proto/mailroom/v1/mailroom.grpc.pb.h"
#include "sender/delivery/retry.h"
#include "sender/lease/collector_credentials.h"
#include "sender/render/message.h"
#include "sender/render/renderer.h"
#include "sender/transport/file_entry.h"
#include "sender/transport/registry.h"
#include "sender/transport/sandbox_entry.h"
#include "sender/transport/transport_factory.h"

namespace mailroom {
namespace {

using Level = DoctorLine::Level;

// The part of a template set's name a line shows: "activation.de", "activation" (default).
std::string SetName(const std::string& action, const std::string& locale) {
  return absl::StrCat(action, locale.empty() ? "" : ".", locale);
}

bool PlaceholderDomain(absl::string_view domain) {
  for (const char* suffix : {".localhost", ".invalid", ".test", ".example", ".local"}) {
    if (absl::EndsWith(domain, suffix)) return true;
  }
  for (const char* reserved : {"example.com", "example.org", "example.net"}) {  // RFC 2606
    if (domain == reserved || absl::EndsWith(domain, absl::StrCat(".", reserved))) return true;
  }
  return domain == "localhost";
}

}  // namespace

std::string FormatDoctorLine(const DoctorLine& line) {
  std::string text = line.text;
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  const char* level = line.level == Level::kOk     ? "ok  "
                      : line.level == Level::kWarn ? "warn"
                                                   : "FAIL";
  return absl::StrCat(level, " ", line.check, ": ", text);
}

std::vector<DoctorLine> CheckMessageSettings(const SenderConfig& c) {
  std::vector<DoctorLine> out;
  const TransportEntry* entry = FindTransportEntry(c.transport.kind);
  const bool reaches_recipients = entry == nullptr || entry->reaches_recipients;
  auto from = ParseMailbox(c.from);
  if (!from.ok()) {
    out.push_back(
        DoctorLine::Fail("from", absl::StrCat("MAILROOM_FROM: ", from.status().message())));
  } else {
    const std::string domain = from->second.substr(from->second.find('@') + 1);
    if (reaches_recipients && PlaceholderDomain(domain)) {
      out.push_back(DoctorLine::Warn(
          "from", absl::StrCat(from->second, ": ", domain,
                               " is a placeholder domain; providers refuse or spam-file "
                               "mail from a domain that is not yours (set MAILROOM_FROM)")));
    } else {
      out.push_back(DoctorLine::Ok("from", from->second));
    }
  }

  const std::string& base = c.link_base_url;
  const bool https = absl::StartsWith(base, "https://");
  const std::string host = HostOf(base);
  const std::string name = host.substr(0, host.rfind(':') == std::string::npos || host.back() == ']'
                                              ? host.size()
                                              : host.rfind(':'));
  if (name.empty()) {
    out.push_back(
        DoctorLine::Fail("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                               "\" has no host: the emails' links go nowhere")));
    return out;
  }
  const size_t before = out.size();
  if (absl::StrContains(base, "?") || absl::StrContains(base, "#")) {
    out.push_back(
        DoctorLine::Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                               "\" has a query or fragment: links are the base "
                                               "followed by /activate?token=...")));
  }
  const bool local = name == "localhost" || name == "127.0.0.1" || name == "[::1]";
  if (reaches_recipients && local) {
    out.push_back(DoctorLine::Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL points at ", host,
                                                         ": recipients cannot open these links")));
  } else if (!https && !local) {
    out.push_back(
        DoctorLine::Warn("links", absl::StrCat("MAILROOM_LINK_BASE_URL \"", base,
                                               "\" is http://: the tokens in the links cross "
                                               "the network in clear")));
  }
  if (out.size() == before) {
    std::string trimmed = base;
    while (!trimmed.empty() && trimmed.back() == '/') trimmed.pop_back();
    out.push_back(DoctorLine::Ok("links", absl::StrCat(trimmed, "/activate?token=..., ", trimmed,
                                                       "/recover?token=..., ", trimmed,
                                                       "/action/<action>?token=...")));
  }
  return out;
}

// What a rendered sample of `action` in `locale` should show: something to act on (for an
// action known to carry a token or a code) and a subject.
void CheckSample(const std::string& action, const std::string& locale, const RenderedEmail& preview,
                 std::vector<DoctorLine>* out) {
  const std::string name = SetName(action, locale);
  const std::string both = preview.text + preview.html;
  const bool builtin = std::find(BuiltinActions().begin(), BuiltinActions().end(), action) !=
                       BuiltinActions().end();
  // Whether an action of the application's own carries a token is the database's to say.
  if (builtin && !IsBuiltinNotice(action) && !absl::StrContains(both, "SAMPLE-TOKEN") &&
      !absl::StrContains(both, "12345")) {
    out->push_back(DoctorLine::Warn(
        "templates",
        absl::StrCat(name,
                     ": neither the text nor the HTML shows {{link}}, {{token}} or {{code}}: the "
                     "reader has nothing to act on (a misspelt variable renders as nothing)")));
  }
  if (preview.subject.find_first_not_of(' ') == std::string::npos) {
    out->push_back(DoctorLine::Warn("templates", absl::StrCat(name, ": the subject is empty")));
  }
}

// A locale with templates for some built-in actions but not all: its readers get the others in
// the default language. One line per such locale.
void CheckLocales(const Templates& templates, std::vector<DoctorLine>* out) {
  std::set<std::string> locales;
  for (const std::string& action : templates.Actions()) {
    for (const std::string& locale : templates.Locales(action)) {
      if (!locale.empty()) locales.insert(locale);
    }
  }
  for (const std::string& locale : locales) {
    std::vector<std::string> has, missing;
    for (const std::string& action : BuiltinActions()) {
      const std::vector<std::string> sets = templates.Locales(action);
      (std::find(sets.begin(), sets.end(), locale) != sets.end() ? has : missing).push_back(action);
    }
    if (missing.empty()) continue;
    out->push_back(DoctorLine::Warn(
        "templates", absl::StrCat("locale ", locale, " has templates for ",
                                  has.empty() ? "no built-in action" : absl::StrJoin(has, ", "),
                                  " but none for ", absl::StrJoin(missing, ", "),
                                  ": its readers get those in the default language")));
  }
}

std::vector<DoctorLine> CheckTemplates(const SenderConfig& c, Clock* clock) {
  std::vector<DoctorLine> out;
  std::vector<absl::Status> problems;
  Templates templates = Templates::LoadAll(c.template_dir, &problems);
  out.reserve(problems.size());
  for (const absl::Status& p : problems) {
    out.push_back(DoctorLine::Fail("templates", std::string(p.message())));
  }
  // A broken MAILROOM_FROM is reported on its own line; the templates are still rendered.
  RendererOptions options{c.from, c.product_name, c.link_base_url};
  if (!ParseMailbox(c.from).ok()) options.from = "doctor <doctor@example.invalid>";
  auto renderer = Renderer::Create(templates, options, clock);
  if (!renderer.ok()) {
    out.push_back(DoctorLine::Fail("templates", std::string(renderer.status().message())));
    return out;
  }
  const size_t before = out.size();
  std::vector<std::string> rendered;
  for (const std::string& action : BuiltinActions()) {
    if (!templates.Has(action)) {
      out.push_back(DoctorLine::Fail("templates", absl::StrCat(action, ": no templates")));
    }
  }
  for (const std::string& action : templates.Actions()) {
    for (const std::string& locale : templates.Locales(action)) {
      const std::string name = SetName(action, locale);
      // A built-in action's real code length and expiry (the database's seeds).
      const v1::Job job = renderer->SampleJob(action, locale, DefaultActionRules(action));
      auto email = renderer->Render(job);
      if (!email.ok()) {
        out.push_back(
            DoctorLine::Fail("templates", absl::StrCat(name, ": ", email.status().message())));
        continue;
      }
      auto preview = renderer->Preview(action, locale);
      if (!preview.ok()) {
        out.push_back(
            DoctorLine::Fail("templates", absl::StrCat(name, ": ", preview.status().message())));
        continue;
      }
      CheckSample(action, locale, *preview, &out);
      rendered.push_back(name);
    }
  }
  CheckLocales(templates, &out);
  if (out.size() == before) {
    out.push_back(DoctorLine::Ok(
        "templates",
        absl::StrCat(rendered.size(), " sets of ", templates.Actions().size(),
                     " actions render a sample job (", absl::StrJoin(rendered, ", "), ") from ",
                     c.template_dir.empty()
                         ? "the built-in templates"
                         : absl::StrCat("the built-in templates and ", c.template_dir))));
  }
  return out;
}

std::vector<DoctorLine> CheckCollector(const SenderConfig& c) {
  auto creds = CollectorCredentials(
      {c.collector_tls, c.collector_ca_file, c.client_cert_file, c.client_key_file});
  if (!creds.ok()) return {DoctorLine::Fail("collector", std::string(creds.status().message()))};
  auto stub = v1::Collector::NewStub(grpc::CreateChannel(c.collector_address, *creds));
  grpc::ClientContext ctx;
  if (!c.collector_token.empty()) {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", c.collector_token));
  }
  // Not wait_for_ready: an address nobody answers on is a finding, not something to wait out.
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(kDoctorCheckTimeout)));
  v1::GetUsageRequest req;
  req.set_consumer_group(c.group);
  v1::GetUsageResponse resp;
  const grpc::Status st = stub->GetUsage(&ctx, req, &resp);
  const std::string where = absl::StrCat(c.collector_address,
                                         c.collector_tls ? " (TLS)" : " (plaintext)");
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return {DoctorLine::Ok("collector",
                             absl::StrCat(where, ": GetUsage for group ", c.group, " answered (",
                                          resp.sent(), " emails this month)"))};
    case grpc::StatusCode::UNAUTHENTICATED:
      return {DoctorLine::Fail("collector", absl::StrCat(where, ": the credential is refused (",
                                                         st.error_message(),
                                                         "): check MAILROOM_COLLECTOR_TOKEN"))};
    case grpc::StatusCode::PERMISSION_DENIED:
      return {
          DoctorLine::Fail("collector", absl::StrCat(where, ": the credential may not serve group ",
                                                     c.group, " (", st.error_message(), ")"))};
    case grpc::StatusCode::UNAVAILABLE:
      // gRPC reports a refused certificate as an unavailable address; say which it was.
      return {DoctorLine::Fail("collector",
                               absl::StrCat(where,
                                            absl::StrContains(st.error_message(), "andshake") ||
                                                    absl::StrContains(st.error_message(), "SSL")
                                                ? ": TLS failed: "
                                                : ": unreachable: ",
                                            st.error_message()))};
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return {
          DoctorLine::Fail("collector", absl::StrCat(where, ": no answer within ",
                                                     absl::FormatDuration(kDoctorCheckTimeout)))};
    default:
      return {DoctorLine::Fail("collector",
                               absl::StrCat(where, ": GetUsage failed: ", st.error_message()))};
  }
}

namespace {

// What a transport's doctor check is told of the rest of the configuration.
DoctorContext ContextOf(const SenderConfig& c) {
  auto from = ParseMailbox(c.from);
  return {from.ok() ? from->second : ""};
}

}  // namespace

std::vector<DoctorLine> CheckTransport(const SenderConfig& c) {
  const TransportEntry* entry = FindTransportEntry(c.transport.kind);
  if (entry == nullptr || entry->doctor == nullptr) return {};
  return entry->doctor(c.transport, ContextOf(c));
}

std::vector<DoctorLine> CheckFileTransport(const SenderConfig& c) {
  return kFileEntry.doctor(c.transport, ContextOf(c));
}

std::vector<DoctorLine> CheckSandboxTransport(const SenderConfig& c) {
  return kSandboxEntry.doctor(c.transport, ContextOf(c));
}

std::string SendErrorClass(const absl::Status& error) {
  if (IsRecipientRejected(error)) {
    return "recipient rejected (permanent; the address is suppressed)";
  }
  if (IsProviderError(error)) return "provider error (the breaker holds every job)";
  if (IsMaybeSent(error)) return "maybe sent (retried once)";
  if (RetryPolicy::Retryable(error)) return "temporary (retried)";
  return "permanent (the job fails)";
}

int RunSendTest(const SenderConfig& c, const std::string& address, std::FILE* out, Clock* clock) {
  CurlGlobalInit();
  auto line = [&](const DoctorLine& l) {
    std::fprintf(out, "%s\n", FormatDoctorLine(l).c_str());
    std::fflush(out);
  };
  auto config_error = [&](absl::string_view why) {
    line(DoctorLine::Fail("send-test", std::string(why)));
    return 2;
  };
  auto templates = Templates::Load(c.template_dir);
  if (!templates.ok()) return config_error(templates.status().message());
  auto renderer = Renderer::Create(*std::move(templates),
                                   {c.from, c.product_name, c.link_base_url, c.template_dir},
                                   clock);
  if (!renderer.ok()) return config_error(renderer.status().message());
  v1::Job job = renderer->SampleJob("activation", "", DefaultActionRules("activation"));
  job.set_email(address);
  // No job: the sample's token activates nothing, and with id 0 no provider event about this
  // email can reach a job by its tags.
  job.set_job_id(0);
  auto email = renderer->Render(job);
  if (!email.ok()) {
    return config_error(absl::StrCat("cannot send to that address: ", email.status().message()));
  }
  auto transport = MakeTransport(TransportConfigOf(c));
  if (!transport.ok()) return config_error(transport.status().message());
  const std::string name = (*transport)->Name();
  auto sent = (*transport)->Send(*email);
  if (!sent.ok()) {
    line(DoctorLine::Fail("send-test",
                          absl::StrCat("refused by ", name, ": ", SendErrorClass(sent.status()),
                                       ": ", sent.status().message())));
    return 1;
  }
  line(DoctorLine::Ok("send-test", absl::StrCat("accepted by ", name, ", provider message id ",
                                                sent->provider_id)));
  return 0;
}

int RunDoctor(const SenderConfig& c, std::FILE* out) {
  CurlGlobalInit();
  int problems = 0, warnings = 0;
  auto print = [&](const std::vector<DoctorLine>& lines) {
    for (const DoctorLine& line : lines) {
      problems += line.level == Level::kFail;
      warnings += line.level == Level::kWarn;
      std::fprintf(out, "%s\n", FormatDoctorLine(line).c_str());
    }
    std::fflush(out);
  };
  print({DoctorLine::Ok("config",
                        absl::StrCat("loaded: transport ", c.transport.kind, ", consumer group ",
                                     c.group, ", collector ", c.collector_address))});
  print(CheckMessageSettings(c));
  print(CheckTemplates(c, RealClock::Get()));
  print(CheckTransport(c));
  print(CheckCollector(c));
  std::fprintf(out, "%d problem%s, %d warning%s\n", problems, problems == 1 ? "" : "s", warnings,
               warnings == 1 ? "" : "s");
  std::fflush(out);
  return problems == 0 ? 0 : 1;
}

}  // namespace mailroom
