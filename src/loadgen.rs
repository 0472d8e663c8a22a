//! Synthetic traffic: a position-based click model over several models of
//! different quality, sent to a running server (loadgen, demo, benchmarks).
