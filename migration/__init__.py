"""migration"""
