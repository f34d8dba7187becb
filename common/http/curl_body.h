#pragma once

#include <curl/curl.h>

#include <cstddef>

#include "absl/strings/string_view.h"

namespace mailroom {

// The body of one HTTP POST, handed to libcurl through a read callback (CURLOPT_READFUNCTION,
// with its size as CURLOPT_POSTFIELDSIZE_LARGE: a Content-Length, not chunks) so that libcurl
// can never send it a second time by itself. libcurl sends a request again on a fresh
// connection when a kept-alive one closed before any byte of the answer came back, rewinding
// the body to do so; a body given as CURLOPT_POSTFIELDS always rewinds, so a server that had
// acted on the first request (a provider sending an email) would act twice while the caller
// counted once. This body refuses every rewind once libcurl has read a byte of it (a rewind to
// the start before that is allowed), and libcurl then ends the transfer with
// CURLE_SEND_FAIL_REWIND: a request that may have reached the server, for the caller to decide
// about (the sender's HttpTransferStatus counts it as maybe sent, and its engine retries it
// once itself).
// Not thread-safe; one transfer at a time. The bytes are not copied: `body` must outlive the
// transfer, and so must this object.
class CurlBody {
 public:
  explicit CurlBody(absl::string_view body) : body_(body) {}
  CurlBody(const CurlBody&) = delete;
  CurlBody& operator=(const CurlBody&) = delete;

  // Makes the next transfer on `c` a POST of this body (CURLOPT_POST, the read and seek
  // callbacks and the Content-Length).
  void Attach(CURL* c);

  // True once libcurl has read any byte of the body (it may have reached the peer).
  bool started() const { return started_; }

 private:
  static size_t Read(char* buffer, size_t size, size_t nitems, void* userdata);
  static int Seek(void* userdata, curl_off_t offset, int origin);

  absl::string_view body_;
  size_t offset_ = 0;
  bool started_ = false;
};

// The connection options every HTTP request of mailroom's sets (PerformOutbound, GET or POST),
// so that a CurlBody's refusal to rewind stays rare:
// * HTTP/1.1 only. Over HTTP/2 a stream the server refused (REFUSED_STREAM, or cut by a GOAWAY)
//   is one the server guarantees it did not process, and libcurl sends it again by rewinding
//   the body: refused here, that request would count as ambiguous (for the sender, a job's
//   second ambiguous send counts as sent).
// * A kept connection idle for more than 20 s is not reused. Servers close idle connections
//   (after 60 s or more, usually), and one closing just as a request goes out is the only way
//   an HTTP/1.1 request ends unanswered on a healthy server.
void SetHttpConnectionOptions(CURL* c);

}  // namespace mailroom
