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
}
