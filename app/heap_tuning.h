#pragma once
// How the heap is set up for a headless command: one pass that builds large state dicts in stages and
// exits. The window keeps glibc's defaults (it lives long and frees as it goes).

namespace sl::app {

// Call first thing in main() for a headless command, before any thread starts.
// - `oneArena` (a command that loads one source: cli::usesOneHeapArena): every thread allocates from one
//   heap arena. A worker thread's arena keeps what it freed for that thread alone, so the shard headers a
//   second thread had read (22 MB of a 163-shard index) stayed resident beside everything built later: s2's
//   peak 99 -> 92 MB, case a's 119 -> 113 MB. Not for commands that load two sources at once (diff,
//   suggest): there the arena's lock made diff 20% slower.
// - The heap gets transparent huge pages: that one arena's advised in place, otherwise by replacing the
//   process with a fresh copy of itself (same arguments) started with glibc's tunable; it returns when no
//   copy is made.
void tuneHeapForHeadlessRun(char** argv, bool oneArena);

} // namespace sl::app
