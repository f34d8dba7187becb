#include "common/metrics.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mailroom {
namespace {

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, labels[i].first, "=\"");
    for (char c : labels[i].second) {
      if (c == '\\' || c == '"') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  return out + "}";
}

std::string FormatValue(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 1e15 && v > -1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrFormat("%.6g", v);
}

}  // namespace

void Metrics::Describe(const std::string& name, Type type, const std::string& help) {
  absl::MutexLock lock(&mu_);
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  f.described = true;
}

void Metrics::Add(const std::string& name, double v, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  families_[name].series[RenderLabels(labels)] += v;
}

void Metrics::Set(const std::string& name, double v, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  families_[name].series[RenderLabels(labels)] = v;
}

void Metrics::Clear(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it != families_.end()) it->second.series.clear();
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(RenderLabels(labels));
  return s == it->second.series.end() ? 0 : s->second;
}

void Metrics::SetCollectHook(std::function<void()> hook) { hook_ = std::move(hook); }

std::string Metrics::Render() const {
  if (hook_) hook_();
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    if (f.described) {
      absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ",
                      f.type == Type::kCounter ? "counter" : "gauge", "\n");
    }
    for (const auto& [labels, v] : f.series) {
      absl::StrAppend(&out, name, labels, " ", FormatValue(v), "\n");
    }
  }
  return out;
}

MetricsServer::MetricsServer() = default;
MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& address, const Metrics* metrics) {
  size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics address ", address));
  }
  server_ = std::make_unique<httplib::Server>();
  server_->Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Render(), "text/plain; version=0.0.4");
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
    if (port_ < 0) return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  } else {
    if (!server_->bind_to_port(host, port)) {
      return absl::UnavailableError(absl::StrCat("cannot bind ", address));
    }
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mailroom
