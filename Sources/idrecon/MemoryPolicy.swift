#if canImport(CMalloc)
import CMalloc
#endif

/// How the process allocates: jemalloc, with the settings `CMalloc` gives it (two arenas, freed pages
/// returned after a second by jemalloc's own thread, blocks of 512 KiB and more when freed). glibc's
/// allocator, used before, grew slower as a long run went on: blocks allocated on the reading and
/// validating threads and freed on the writer's, with longer-lived ones among them, left its arenas
/// fragmented, and its `malloc` searched further each million (a 10M `ingest`'s CPU per record 8.1 → 9.3 µs
/// from its first million to its last; with jemalloc 7.3 → 7.7 µs, and 81 → 68–71 s in all;
/// `schemas/performance.md`, "The VM's fresh memory, and the allocator").
enum MemoryPolicy {
    /// Keeps `CMalloc`'s settings in the executable (a C file that nothing calls would be left out).
    static func apply() {
        #if canImport(CMalloc)
        _ = idrecon_allocator_arenas()
        #endif
    }

    /// For `replay`: freed blocks of 512 KiB and more stay with jemalloc for half a second before they go
    /// back to the kernel, instead of going back as each is freed. A replay lays out each partition's rows
    /// in such blocks and frees them once written, and every next partition faulted fresh pages in again:
    /// 275,000 page faults in a 1M replay, a quarter of its CPU time in the kernel. Kept: 1M 96,000 faults,
    /// 7 % less wall time, peak RSS 167-188 → 201-227 MB; 10M 2.4M → 0.8M faults, 4-8 % less wall time,
    /// 252-258 → 301-324 MB. Not for `ingest` (its peak 200-222 → 286-289 MB at the same speed) nor `consume`,
    /// which runs for months (`schemas/performance.md`, "Freed large blocks, kept for replay").
    static func keepLargeBlocks() {
        #if canImport(CMalloc)
        _ = idrecon_allocator_keep_large_blocks(500)
        #endif
    }
}
