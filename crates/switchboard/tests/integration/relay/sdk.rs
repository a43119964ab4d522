//! Real SDK clients through the relay (filled in below).
