//! Profiles.
