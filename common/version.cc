#include "common/version.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"

namespace mailroom {

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", kVersion, "\nbuild: ",
#if defined(__clang__)
                      "clang ", __clang_version__,
#elif defined(__GNUC__)
                      "gcc ", __VERSION__,
#endif
                      ", gRPC ", grpc::Version(), ", Protobuf ",
                      google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION), "\n");
}

}  // namespace mailroom
