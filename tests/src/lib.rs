//! Testbed support for Continuum's end-to-end tests.
