"""search_templates"""
