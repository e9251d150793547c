"""The pure domain: definitions, calendars, inputs, decisions, time, settings.

Imports nothing but `wfsched.errors` and itself: no store, no processes, no
clock reads (time is always a parameter).
"""
