"""Local servers that speak external APIs (TGI) over real HTTP on 127.0.0.1, for tests and benchmarks."""
