"""encoders/models"""
