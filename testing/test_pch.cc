// Compiled only to build the test executables' precompiled header (testing/test_pch.h).
