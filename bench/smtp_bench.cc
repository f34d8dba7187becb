// Sender SMTP throughput: sends M rendered messages through SmtpTransport with N connections
// to an SMTP server (e.g. postfix's smtp-sink) and prints messages per second.
// Usage: smtp_bench --url=smtp://127.0.0.1:PORT --connections=8 --messages=20000
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "sender/render/message.h"
#include "sender/render/renderer.h"
#include "sender/transport/smtp_transport.h"

ABSL_FLAG(std::string, url, "smtp://127.0.0.1:2525", "the SMTP server (smtp://host:port)");
ABSL_FLAG(int, connections, 1, "parallel connections");
ABSL_FLAG(int, messages, 10000, "messages to send");

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (auto done = mailroom::ParseToolFlags("smtp_bench", "usage: smtp_bench [flags]\n", argc,
                                           argv)) {
    return *done;
  }
  const std::string url = absl::GetFlag(FLAGS_url);
  const int connections = absl::GetFlag(FLAGS_connections);
  const int messages = absl::GetFlag(FLAGS_messages);
  mailroom::TransportConfig c;
  c.kind = "smtp";
  auto& smtp = c.Mutable<mailroom::SmtpSettings>();
  smtp.url = url;
  smtp.require_tls = false;
  c.connections = connections;
  mailroom::SmtpTransport transport(c);
  // A real rendered message (activation template, about 1.5 KB).
  auto templates = mailroom::Templates::Load("");
  mailroom::TemplateVars vars{"benchuser",
                              "bench@example.test",
                              std::string(86, 'T'),
                              "12345",
                              "mailroom",
                              "https://app.example.test",
                              absl::Now() + absl::Minutes(15),
                              absl::Now()};
  auto r = templates->Render("activation", vars);
  mailroom::Message m{"mailroom <no-reply@example.test>",
                      "bench@example.test",
                      "benchuser",
                      r->subject,
                      r->text,
                      r->html,
                      "bench@example.test",
                      absl::Now()};
  mailroom::OutgoingEmail email{"no-reply@example.test", "bench@example.test",
                                *mailroom::BuildMime(m), "bench@example.test"};
  std::atomic<int> next{0}, failed{0};
  absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int w = 0; w < connections; ++w) {
    workers.emplace_back([&] {
      while (next.fetch_add(1) < messages) {
        if (!transport.Send(email).ok()) failed++;
      }
    });
  }
  for (auto& t : workers) t.join();
  double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("sender SmtpTransport: %d connections, %d messages of %zu bytes in %.2f s: %.0f msg/s"
              " (%d failed)\n",
              connections, messages, email.mime.size(), secs, messages / secs, failed.load());
  return failed.load() == 0 ? 0 : 1;
}
