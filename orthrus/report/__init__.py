"""Reporting: claims, summary, comparisons of tables and runs, figures."""
