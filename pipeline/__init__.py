"""The stream processor: bus → decode → energy, detectors, alerts → store."""
