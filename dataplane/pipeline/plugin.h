// Loads element-op plugins (shared libraries implementing sluice_plugin.h) and registers their
// ops in OpRegistry::Builtin(). Thread-safe; loading the same path twice is a no-op. Libraries
// stay loaded for the life of the process.
//
// Plugin allow-list: a process that loads pipelines from untrusted peers (the data service's
// dispatcher and workers) calls RestrictPlugins once at start-up; from then on LoadPlugin loads
// only libraries whose resolved path (symlinks and ".." resolved) lies inside one of the allowed
// directories, and it dlopens that resolved path (a symlink swapped after the check cannot
// redirect it). Without RestrictPlugins (the default, e.g. a trainer's client) any path loads.
#ifndef SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_
#define SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

absl::Status LoadPlugin(const std::string& path);

// Resolves each of `dirs` (realpath). Errors name the directory and `flag`.
absl::StatusOr<std::vector<std::string>> ResolvePluginDirs(const std::vector<std::string>& dirs, absl::string_view flag);

// Whether the plugin `path` may be loaded from `resolved_dirs` (already resolved, see
// ResolvePluginDirs): returns the path with symlinks and ".." resolved, or FAILED_PRECONDITION naming
// the path and `flag` — also for an empty allow-list (every plugin refused), a bare file name (dlopen
// would search the system library path) and a path that does not resolve.
absl::StatusOr<std::string> CheckPluginPath(const std::string& path, const std::vector<std::string>& resolved_dirs,
                                            absl::string_view flag);
// CheckPluginPath for every plugin `def` names; the error also names plugins[i].
absl::Status CheckPipelinePlugins(const PipelineDef& def, const std::vector<std::string>& resolved_dirs,
                                  absl::string_view flag);

// From now on (process-wide) LoadPlugin refuses paths outside `dirs` (see above). `flag` names the
// setting in errors ("--plugin_dir"). Errors: a directory that does not resolve.
absl::Status RestrictPlugins(const std::vector<std::string>& dirs, const std::string& flag);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_PLUGIN_H_
