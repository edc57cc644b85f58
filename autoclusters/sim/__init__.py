"""Simulated GPU nodes for the local cluster (kwok keeps them Ready and runs their pods)."""
