"""encoders/losses"""
