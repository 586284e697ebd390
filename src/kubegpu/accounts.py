"""The seed's arithmetic (placeholder until the foundation lands)."""
