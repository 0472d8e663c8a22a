//! Prometheus text rendering of the engine's figures.
