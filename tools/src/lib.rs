//! ricochet tools: a synthetic dataset generator, an open-loop HTTP load generator and the
//! capacity report generator.

pub mod datagen;
pub mod loadgen;
pub mod perfreport;
pub mod rng;
