"""`ukl bench`: system calls, applications, boot, remote calls."""
