//! ricochet storage engine.
