/// What build this is: the release number, bumped by hand with each release, and the
/// commit it was built from (`git describe` at build time, by `BuildInfoPlugin`).
public enum IdreconVersion {
    public static let number = "0.9.0"
    public static let commit = BuildInfo.commit
    /// `0.9.0 (commit)`, what `--version` prints.
    public static var description: String { "\(number) (\(commit))" }
}
