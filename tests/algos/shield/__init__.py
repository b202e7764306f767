"""Tests of the shield and its parts."""
