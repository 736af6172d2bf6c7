"""Tests of the state store (``streaming.state``)."""
