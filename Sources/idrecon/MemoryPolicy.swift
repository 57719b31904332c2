import Foundation
import IdreconDomain
#if canImport(CMalloc)
import CMalloc
#endif

/// How the process asks glibc's allocator for memory. A catch-up holds a chunk's facts and
/// groups them per projection, then frees them: with glibc's defaults those large, short-lived
/// blocks come from heaps that are not given back, the next chunk's blocks land beside the
/// leftovers, and the peak grew by tens of megabytes from one catch-up to the next (1M ingest,
/// chunks of 400,000: 350–391 MB against 303–316 MB with these settings). So blocks of 128 KiB
/// and more are mapped on their own and returned when freed (a fixed threshold: glibc would
/// otherwise raise it to the size of the last one freed), and threads share one heap per core
/// (glibc's default is eight per core), enough for validation on every core.
enum MemoryPolicy {
    static func apply() {
        #if canImport(CMalloc)
        _ = mallopt(M_MMAP_THRESHOLD, 128 * 1024)
        _ = mallopt(M_ARENA_MAX, Int32(clamping: max(2, Machine.cores)))
        #endif
    }
}
