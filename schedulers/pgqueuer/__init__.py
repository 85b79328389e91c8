class PgqueuerScheduler:
    pass
