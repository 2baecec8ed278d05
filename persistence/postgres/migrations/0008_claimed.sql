-- Messages a competing consumer claimed ahead (Step.Claim): moved from the
-- channel's queue into the consumer's mailbox (target set), and flagged so
-- that they go back to the queue if it unsubscribes or ends.
ALTER TABLE messages ADD COLUMN claimed boolean NOT NULL DEFAULT false;
