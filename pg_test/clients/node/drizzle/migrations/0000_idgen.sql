-- Custom SQL migration file, put your code below! --
CREATE EXTENSION IF NOT EXISTS idgen;  -- the functions the DEFAULT calls, before the table
