// Loads element-op plugins (shared libraries implementing sluice_plugin.h) and registers their
// ops in OpRegistry::Builtin(). Thread-safe; loading the same path twice is a no-op. Libraries
// stay loaded for the life of the process.
#ifndef SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_
#define SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_

#include <string>

#include "absl/status/status.h"

namespace sluice::pipeline {

absl::Status LoadPlugin(const std::string& path);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_
