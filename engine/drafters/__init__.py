"""Drafters propose tokens for the target to verify. All implement `engine.drafters.base.Drafter`."""
