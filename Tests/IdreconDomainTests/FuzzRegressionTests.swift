import Foundation
import IdreconDomain
import IdreconFuzzing
import Testing

/// The fuzzer's seeds and findings (`tools/idrecon-fuzz/corpus`, `…/crashers`) replayed
/// through the record path on every test run: each once trapped or broke a property.
@Suite struct FuzzRegressionTests {
    static let tools = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("tools/idrecon-fuzz")

    @Test(arguments: ["corpus", "crashers"])
    func inputsPassTheRecordPath(folder: String) throws {
        let directory = Self.tools.appendingPathComponent(folder)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(!names.isEmpty)
        for name in names {
            RecordPath.exercise([UInt8](try Data(contentsOf: directory.appendingPathComponent(name))))
        }
    }

    @Test func signedTokensWithNumericDatesOutOfRangeAreQuarantined() throws {
        let crashers = Self.tools.appendingPathComponent("crashers")
        for name in ["token-exp-1e19", "token-exp-1e300", "token-exp-int64max", "token-iat-int64min"] {
            let event = try EventValidator.validate([UInt8](try Data(contentsOf: crashers.appendingPathComponent(name)))).get()
            #expect(RecordPath.verifier.check(event) == .outOfRange(name.contains("iat") ? "iat" : "exp"), "\(name)")
        }
        let valid = try EventValidator.validate([UInt8](try Data(contentsOf: Self.tools.appendingPathComponent("corpus/token-valid")))).get()
        #expect(RecordPath.verifier.check(valid) == nil)
    }
}
