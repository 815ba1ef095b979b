//! ricochet tools.
