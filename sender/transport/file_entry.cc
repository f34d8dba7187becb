#include "sender/transport/file_entry.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "sender/transport/file_transport.h"

namespace mailroom {
namespace {

SettingsTable FileRows(const TransportVars& v) {
  return {{v.Mailroom("FILE_DIR"), "./outbox", "", "",
           v.Help("file: directory the .eml files are written to")}};
}

absl::Status ReadFile(const Env& env, const TransportVars& v, TransportConfig* config) {
  config->Mutable<FileSettings>().dir = env.String(
      FindSetting(FileRows(v), v.Mailroom("FILE_DIR")));
  return absl::OkStatus();
}

absl::Status CheckFile(const Env&, const TransportVars&, TransportConfig*) {
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> MakeFile(const TransportConfig& config) {
  const std::string& dir = config.Get<FileSettings>().dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("MAILROOM_FILE_DIR: cannot create \"", dir, "\": ", ec.message()));
  }
  return std::unique_ptr<Transport>(new FileTransport(dir, config.connections));
}

std::vector<DoctorLine> DoctorFile(const TransportConfig& config, const DoctorContext&) {
  const std::string& dir = config.Get<FileSettings>().dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return {DoctorLine::Fail("file", absl::StrCat("MAILROOM_FILE_DIR: cannot create \"", dir,
                                                  "\": ", ec.message()))};
  }
  // What the transport does for every message: create a file in the directory.
  const std::string probe = absl::StrCat(dir, "/.doctor-", getpid(), ".tmp");
  int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) {
    return {DoctorLine::Fail("file", absl::StrCat("MAILROOM_FILE_DIR: cannot write in \"", dir,
                                                  "\": ", std::strerror(errno)))};
  }
  close(fd);
  unlink(probe.c_str());
  return {DoctorLine::Ok("file", absl::StrCat("messages are written to ", dir))};
}

}  // namespace

const TransportEntry kFileEntry = {
    "file",   "file",     /*reaches_recipients=*/false, FileRows, ReadFile, CheckFile,
    MakeFile, DoctorFile,
};

}  // namespace mailroom
