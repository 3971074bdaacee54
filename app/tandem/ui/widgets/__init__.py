"""Widgets of the Tandem app."""
