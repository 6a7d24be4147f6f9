#pragma once
// How the heap is set up for a headless command: one pass that builds large state dicts in stages and
// exits. The window keeps glibc's defaults (it lives long and frees as it goes).

namespace sl::app {

// Call first thing in main() for a headless command. It may replace the process with a fresh copy of
// itself (same arguments) that has transparent huge pages for its heap; it returns when no copy is made.
void tuneHeapForHeadlessRun(char** argv);

} // namespace sl::app
