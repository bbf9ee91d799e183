"""Test lifecycle, command line, configuration, store and node control."""
