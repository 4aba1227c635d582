"""Speed benchmarks and the loopback mock server the tests reuse."""
