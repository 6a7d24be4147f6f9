#pragma once
// Long outputs (ls's table rows and JSON entries) written on two cores: items in chunks, the odd chunks by
// a helper thread, handed on in order. The same bytes as one pass, in a little more than
// half the time (a 76,800-tensor listing is 5.7 MB of table and 27 MB of JSON). (diff's JSON report keeps
// its second core for folding the rows meanwhile: report/diff_report_json.cpp.)

#include "report/source_report.h" // TextSink

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <semaphore>
#include <string_view>
#include <thread>
#include <utility>

namespace sl {

// format(slot, from, to) writes items [from, to) into the buffer of `slot` and returns the text: slot 0 is
// the calling thread's, 1 and 2 the helper's, which takes them in turn and waits until the one it needs
// has been handed on. Chunks of `chunkItems` items: the three buffers grow to hold one, so it is sized for
// a few hundred kilobytes of text (all three are new memory: 4,096 JSON entries of a DeepSeek-V3 index
// grew them by 16 MB of peak). `commas` puts one between chunks. An exception on either side stops both
// and is rethrown here.
template <typename Format>
void writeInChunks(size_t n, size_t chunkItems, const Format& format, const TextSink& sink, bool commas)
{
    const size_t chunks = (n + chunkItems - 1) / chunkItems;
    auto range = [n, chunkItems](size_t chunk) {
        return std::pair { chunk * chunkItems, std::min(n, (chunk + 1) * chunkItems) };
    };
    auto handOn = [&](size_t chunk, std::string_view text) {
        if (commas && chunk > 0)
            sink(",");
        sink(text);
    };
    if (chunks < 2) {
        for (size_t c = 0; c < chunks; ++c)
            handOn(c, format(0, range(c).first, range(c).second));
        return;
    }
    std::binary_semaphore free[2] { std::binary_semaphore(1), std::binary_semaphore(1) };
    std::binary_semaphore ready[2] { std::binary_semaphore(0), std::binary_semaphore(0) };
    std::string_view texts[2];
    std::atomic<bool> stop { false };
    std::exception_ptr helperError;
    std::thread helper([&] {
        try {
            for (size_t c = 1, k = 0; c < chunks && !stop; c += 2, ++k) {
                free[k % 2].acquire();
                if (stop)
                    break;
                texts[k % 2] = format(1 + k % 2, range(c).first, range(c).second);
                ready[k % 2].release();
            }
        } catch (...) {
            helperError = std::current_exception();
            stop = true;
            ready[0].release();
            ready[1].release();
        }
    });
    try {
        for (size_t c = 0, k = 0; c < chunks; ++c) {
            if (c % 2 == 0) {
                handOn(c, format(0, range(c).first, range(c).second));
                continue;
            }
            ready[k % 2].acquire();
            if (helperError)
                break;
            handOn(c, texts[k % 2]);
            free[k % 2].release();
            ++k;
        }
    } catch (...) {
        stop = true;
        free[0].release();
        free[1].release();
        helper.join();
        throw;
    }
    helper.join();
    if (helperError)
        std::rethrow_exception(helperError);
}

} // namespace sl
