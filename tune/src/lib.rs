//! `gapura tune`: rate limits and budgets derived from an access log.
//!
//! It must never hold more than a bounded table of clients, whatever the
//! log's size, and never changes a profile itself.
