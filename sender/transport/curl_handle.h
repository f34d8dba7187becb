#pragma once

// The libcurl handle owners moved to common/http/curl_handle.h; this header forwards to it for
// the includers outside this package (sender/doctor) until they include it themselves.
#include "common/http/curl_handle.h"
