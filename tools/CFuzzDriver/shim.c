// Only the header matters: it declares libFuzzer's driver for Swift.
