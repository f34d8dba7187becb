#pragma once

#include "sender/transport/transport_entry.h"

namespace mailroom {

// The file transport (MAILROOM_TRANSPORT=file): its setting MAILROOM_FILE_DIR (FileSettings),
// its construction (the directory is created) and its doctor check (the directory exists or can
// be made, and a file can be created in it).
extern const TransportEntry kFileEntry;

}  // namespace mailroom
