//! ricochet tools: a synthetic dataset generator and an open-loop HTTP load generator.

pub mod datagen;
pub mod loadgen;
pub mod rng;
