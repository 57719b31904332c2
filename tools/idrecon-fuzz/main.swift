import Foundation
import IdreconFuzzing

// Built with `make fuzz` (-sanitize=fuzzer -DFUZZING): libFuzzer drives `RecordPath` with
// its own arguments (corpus directories, -max_total_time=…). Built normally: runs
// `RecordPath` once over each file (or each file of each directory) given, so findings
// replay without the fuzzer.

#if FUZZING
import CFuzzDriver

var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
    RecordPath.exercise(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
})
#else
var files: [String] = []
for argument in CommandLine.arguments.dropFirst() {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
        FileHandle.standardError.write(Data("idrecon-fuzz: no such file or directory: \(argument)\n".utf8))
        exit(2)
    }
    if isDirectory.boolValue {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: argument)) ?? []
        files += names.sorted().map { argument + "/" + $0 }
    } else {
        files.append(argument)
    }
}
for file in files {
    guard let data = FileManager.default.contents(atPath: file) else { continue }
    RecordPath.exercise([UInt8](data))
}
print("idrecon-fuzz: \(files.count) inputs passed")
#endif
