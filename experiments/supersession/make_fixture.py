"""Write tests/data/longmemeval_knowledge_updates.json: knowledge-update questions in the exact
LongMemEval schema, written for this project (nothing from LongMemEval itself).

Each question's haystack has nine dated sessions: two distractors, the session with the earlier
fact, three distractors, the session with the later fact (the update), two distractors. Both
fact turns are marked ``has_answer`` and both sessions are ``answer_session_ids``; the answer is
the later value. Facts are hand-written, one pair per question, over residence, employer, job
title, partner, counts of pets/children/possessions, favourites and cars, and several updates
are phrased without an obvious change cue (marked ``implicit`` below). Distractors come from a
pool of hand-written sessions, drawn per question with a fixed seed.

    python experiments/supersession/make_fixture.py tests/data/longmemeval_knowledge_updates.json
"""
from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timedelta

# (kind, earlier user turn, later user turn, question, answer, implicit: no obvious change cue)
ITEMS = [
    ("residence", "I live in Austin and I'm looking for weekend running trails nearby. Any suggestions?",
     "We moved to Seattle last month, so I need advice on rain gear for running.",
     "Which city do I live in now?", "Seattle", False),
    ("employer", "I work at Deloitte as an auditor and busy season is coming up. How do I stay sane during long weeks?",
     "I started a new job at Spotify this week! What should I focus on in my first 90 days?",
     "Where do I work now?", "Spotify", False),
    ("count", "I have two cats, Miso and Tofu, and they keep scratching the couch. Any tips?",
     "We adopted a third cat last weekend, a tiny tabby named Tempeh. How do I introduce her to the others?",
     "How many cats do I have?", "Three", False),
    ("partner", "My boyfriend Daniel and I are planning a trip to Lisbon. Which neighborhoods should we stay in?",
     "I'm dating Priya now, and I want to plan a special dinner for our first anniversary. Any ideas?",
     "Who am I dating?", "Priya", False),
    ("favourite", "My favorite cuisine is Thai food, and I want to learn to make green curry at home.",
     "Honestly, Ethiopian food is my new favorite cuisine, especially injera with lentils. Where can I learn more?",
     "What is my favorite cuisine?", "Ethiopian food", False),
    ("role", "I'm working as a junior data analyst and I want to get better at SQL window functions.",
     "I got promoted to senior data scientist last week! How should I approach leading a small team?",
     "What is my current job title?", "Senior data scientist", False),
    ("count", "We have two kids, ages 4 and 7, and I need ideas for a rainy afternoon.",
     "Our baby girl was born in March, so we have three kids now. How do I manage mornings with a newborn?",
     "How many children do I have?", "Three", False),
    ("residence", "I live in Brooklyn, and the noise from the street keeps me up at night. Any tips for sleeping better?",
     "The house we bought in New Jersey has a big backyard, so I'd like to start a vegetable garden. Where do I begin?",
     "Where do I live now?", "New Jersey", True),
    ("employer", "I work at Mercy Hospital as a night-shift nurse, and I'm exhausted. How can I adjust my sleep?",
     "I left Mercy and joined a small family clinic downtown, so no more night shifts! What hobbies could I pick up in the evenings?",
     "Where do I work now?", "A small family clinic downtown", False),
    ("count", "I have one dog, a beagle named Rufus, and he pulls on the leash constantly.",
     "Rufus finally has a brother: we brought home another beagle named Bo. How do I walk them both at once?",
     "How many dogs do I have?", "Two", True),
    ("partner", "My girlfriend Emma loves hiking, and I want to surprise her with a weekend trip. Suggestions?",
     "Emma and I broke up in the spring, and I'm single again. Any tips for getting back into dating apps?",
     "Am I in a relationship right now?", "No, I am single (I broke up with Emma)", False),
    ("favourite", "My favorite author is Haruki Murakami, and I'm looking for writers with a similar feel.",
     "These days my favorite author is Octavia Butler; I can't stop reading her books. What should I read after Kindred?",
     "Who is my favorite author?", "Octavia Butler", False),
    ("residence", "I'm based in Toronto and I need a good winter coat for the cold.",
     "I relocated to Vancouver for work, and the rain here is a different story. What jacket should I get?",
     "What city am I living in?", "Vancouver", False),
    ("employer", "I'm working at a startup called Brightleaf as their only designer. How do I manage so many requests?",
     "I accepted an offer at Adobe and started on Monday. How do I get up to speed on a big design system?",
     "Which company do I work for?", "Adobe", False),
    ("count", "I have twelve houseplants and my fiddle leaf fig keeps dropping leaves.",
     "I gave away half of my plants before the move, so I'm down to six. Which ones need the least care?",
     "How many houseplants do I have?", "Six", True),
    ("car", "I drive a 2012 Honda Civic and the brakes have started squeaking. Is that urgent?",
     "I traded in the Civic for a Tesla Model 3 last month, so I'm reading about home charging. What charger do I need?",
     "What car do I drive?", "A Tesla Model 3", False),
    ("residence", "We live in a small apartment in Chicago and I need space-saving storage ideas.",
     "We're living in my parents' old farmhouse in Wisconsin these days, which has far too much storage. How do I heat an old house efficiently?",
     "Where do I live?", "My parents' old farmhouse in Wisconsin", False),
    ("employer", "I work for the city library as a children's librarian, and I need craft ideas for story time.",
     "My first week at the Natural History Museum's education department went great. How do I design a museum workshop for kids?",
     "Where do I work?", "The Natural History Museum (education department)", True),
    ("partner", "My husband Carlos is a chef and I want to buy him a really good knife for his birthday.",
     "Since the divorce I've been living on my own, and I'm learning to cook for one. Any simple recipes?",
     "Am I married?", "No, I am divorced (from Carlos)", True),
    ("favourite", "My favorite drink is an oat milk latte, but buying one every day is getting expensive. Can I make it at home?",
     "I've switched to matcha; it's my favorite drink now and it's gentler on my stomach. How do I whisk it properly?",
     "What is my favorite drink?", "Matcha", False),
    ("residence", "I'm living in London for my master's, and I'm trying to budget for rent.",
     "After graduating I moved back home to Dublin. How do I adjust to living with my parents again?",
     "Which city do I live in?", "Dublin", False),
    ("employer", "I work at an ad agency in Midtown, writing copy for car commercials.",
     "I'm freelancing full-time these days, writing for a few tech clients from home. How should I price my work?",
     "Where do I work now?", "I freelance from home for tech clients", True),
    ("role", "I work as a high school math teacher and I need fresh ideas for teaching fractions.",
     "I'm now working as an instructional designer for an ed-tech company. Which tools should I learn first?",
     "What is my job?", "Instructional designer", False),
    ("residence", "I live in Phoenix and the summer heat is brutal on my garden.",
     "Our new place in Minneapolis came with a greenhouse! What can I grow over the winter?",
     "Where do I live?", "Minneapolis", False),
    ("employer", "I'm employed at Kaiser Permanente in the billing department. How do I ask for a raise?",
     "I got hired at Blue Shield last month and my commute is twice as long. Any podcast recommendations?",
     "Who is my employer?", "Blue Shield", False),
    ("count", "We have two rabbits named Clover and Pip, and I want to build them a bigger hutch.",
     "Sadly Pip passed away over the winter, so Clover is on her own. Should I get her a companion?",
     "How many rabbits do I have?", "One (Clover)", True),
    ("partner", "I'm seeing Theo, and we're going to our first concert together on Friday. What should I wear?",
     "My fiancé Jordan and I are planning a small wedding. Can you help me with a budget?",
     "Who is my partner?", "Jordan (my fiancé)", True),
    ("employer", "I work at Target as a shift manager and scheduling is a nightmare.",
     "I no longer work at Target; I'm a full-time student now. How do I balance classes and a part-time job?",
     "Do I still work at Target?", "No, I am a full-time student now", False),
    ("favourite", "My favourite hiking spot is Mount Tam, and I go there almost every Sunday.",
     "Point Reyes has become my favourite hiking spot since I discovered the coastal trail. What should I pack for a long day there?",
     "What is my favourite hiking spot?", "Point Reyes", False),
    ("residence", "I live in Denver, and my brother lives in Boston and keeps asking me to visit.",
     "I moved to Boise in May, and my brother still lives in Boston. What are fun things to do in Boise?",
     "Which city do I live in?", "Boise", False),
    ("count", "I own four guitars already, but I keep looking at a vintage Stratocaster.",
     "I caved and bought the Strat, which makes five guitars. How should I store them all?",
     "How many guitars do I own?", "Five", False),
    ("employer", "I'm interning at NASA's Jet Propulsion Lab this summer and I'm nervous about my final presentation.",
     "I just started my new position at SpaceX as a propulsion engineer. How do I handle the fast pace?",
     "Where do I work?", "SpaceX", False),
    ("count", "We have 2 chickens in the backyard, and they give us plenty of eggs.",
     "We now have 6 chickens after adding four more hens to the coop. How much feed do they need?",
     "How many chickens do I have?", "Six", False),
    ("residence", "We currently live in San Diego, a few blocks from the beach.",
     "My wife and I relocated to Austin, Texas in the fall. What's a good way to meet people here?",
     "Where do I live now?", "Austin, Texas", False),
    ("car", "My car is a 2015 Subaru Outback and it's been very reliable for camping trips.",
     "We finally got a new car, a Toyota Sienna minivan, since the baby arrived. How do I install a car seat?",
     "What car do I have?", "A Toyota Sienna minivan", False),
    ("role", "I'm working as a line cook at a seafood restaurant, and the Friday rush is intense.",
     "I was promoted to sous chef in January, and now I write the weekly specials. How do I plan a seasonal menu?",
     "What is my position at the restaurant?", "Sous chef", True),
]

# Follow-up turns of a fact session (no facts in them).
FOLLOW_UPS = [
    ("Thanks, that's helpful. Could you turn that into a short checklist?",
     "Of course. Here's a short checklist: pick one thing to start with this week, set a small and specific goal, "
     "put it on your calendar, and review how it went after seven days. Adjust from there rather than trying to change "
     "everything at once."),
    ("Great, and what's the most common mistake people make with this?",
     "The most common mistake is trying to do too much too soon. People buy every tool, read every guide and burn out "
     "within a couple of weeks. Start small, keep notes on what works, and build the habit before you add more."),
    ("Nice. Is there a book or resource you'd recommend?",
     "A good place to start is a well-reviewed beginner's guide from your local library, plus one active online "
     "community where people share real experiences. Pick one source and follow it for a month before adding others."),
]

ASSISTANT_REPLIES = [
    "That's a great question. A few ideas that usually work well: start with the basics, ask people nearby who have done "
    "it before, and give yourself a couple of weeks to settle into a routine. I can go into detail on any of these.",
    "Congratulations on the change! Here are some suggestions: make a simple plan for the first few weeks, focus on one "
    "or two priorities, and be patient with yourself while everything is new. Want me to expand on any of them?",
    "Happy to help. The short answer is to keep it simple at first: choose one approach, try it for a while, and adjust "
    "based on what you notice. Let me know more details and I can tailor the advice.",
]

# Distractor sessions: (user, assistant, user, assistant), none about the facts above.
DISTRACTORS = [
    ("Can you suggest a quick weeknight pasta recipe?", "Try spaghetti aglio e olio: cook the pasta, gently fry sliced garlic "
     "in olive oil with chili flakes, toss with the pasta, a splash of pasta water and chopped parsley. Ready in 15 minutes.",
     "Could I add some vegetables to it?", "Yes: sautéed spinach, cherry tomatoes or roasted broccoli all work well. Add them "
     "to the pan after the garlic and let them soften for a few minutes before adding the pasta."),
    ("What's the difference between a Roth IRA and a traditional IRA?", "With a traditional IRA you may deduct contributions "
     "now and pay tax on withdrawals later; with a Roth IRA you contribute after-tax money and qualified withdrawals are tax-free.",
     "Which one is better if I expect a higher income later?", "If you expect to be in a higher tax bracket in retirement, "
     "a Roth is often attractive because you pay tax at today's lower rate. A tax adviser can check your situation."),
    ("How do I remove a red wine stain from a cotton shirt?", "Blot the stain, rinse from the back with cold water, then apply "
     "a mix of dish soap and hydrogen peroxide for a few minutes before washing. Avoid hot water until the stain is gone.",
     "Does that work on old stains too?", "It can, but old stains may need several rounds or an enzyme-based stain remover "
     "left on overnight. Test peroxide on a hidden spot first, since it can lighten some dyes."),
    ("Can you explain how compound interest works?", "Compound interest means you earn interest on your interest: each period "
     "the interest is added to the balance, so the next period's interest is calculated on a larger amount.",
     "How much would 1,000 dollars grow at 5 percent over ten years?", "Compounded yearly, it would be about 1,629 dollars "
     "after ten years, because 1,000 times 1.05 to the power of 10 is roughly 1,628.89."),
    ("I want to learn a few phrases in Japanese before a trip. Where do I start?", "Start with greetings and politeness: "
     "konnichiwa (hello), arigatou gozaimasu (thank you very much), sumimasen (excuse me) and onegaishimasu (please).",
     "How do I ask where the train station is?", "You can say 'eki wa doko desu ka?' which means 'where is the station?'. "
     "Adding 'sumimasen' first makes it polite: 'sumimasen, eki wa doko desu ka?'."),
    ("What are some good stretches after a long day at the desk?", "Try a doorway chest stretch, seated spinal twists, neck "
     "tilts, hip flexor lunges and a standing forward fold. Hold each for about 30 seconds and breathe slowly.",
     "How often should I do them?", "Once in the evening is good, but short breaks every hour during the day help even more: "
     "stand up, roll your shoulders and do one or two stretches for a minute."),
    ("Can you recommend a few classic science fiction films?", "Some classics: 2001: A Space Odyssey, Blade Runner, Alien, "
     "The Day the Earth Stood Still, Solaris and Close Encounters of the Third Kind.",
     "Which of those is best for a movie night with friends?", "Alien is a crowd-pleaser: it's tense, well paced and works "
     "even for people who don't usually watch science fiction. Blade Runner is better for a quieter, thoughtful evening."),
    ("How do I make my own sourdough starter?", "Mix equal weights of whole wheat flour and water in a jar, cover loosely, "
     "and feed it daily by discarding half and adding fresh flour and water. It is usually active in five to ten days.",
     "How do I know when it's ready?", "It should reliably double in size within four to eight hours of a feeding, smell "
     "pleasantly sour and have lots of bubbles. A spoonful dropped in water should float."),
    ("What's a good way to prepare for a job interview?", "Research the company, prepare short stories that show your skills "
     "using the situation-task-action-result format, and practise answering common questions out loud.",
     "What questions should I ask the interviewer?", "Ask what success looks like in the first six months, how the team "
     "works together, and what the biggest challenge for the role is right now."),
    ("Can you help me plan a birthday party for a ten-year-old?", "Sure. Pick a theme, keep the guest list manageable, plan "
     "two or three games, and have simple food like pizza and fruit. Two hours is plenty for that age.",
     "Any game ideas that don't need much space?", "Try a scavenger hunt with picture clues, musical statues, a drawing "
     "relay or a simple escape-room puzzle made from envelopes and locks."),
    ("How do I back up photos from my phone?", "Use your phone's cloud service, or copy them to a computer regularly and keep "
     "a second copy on an external drive. The safest setup has three copies on two kinds of storage, one offsite.",
     "Is cloud storage safe?", "Major providers are generally reliable and encrypt your data, but use a strong password and "
     "two-factor authentication, and keep a local copy too in case you lose access to the account."),
    ("What should I know before adopting a houseplant routine for beginners?", "Match plants to your light, water only when "
     "the top of the soil is dry, and choose forgiving plants like pothos, snake plants or ZZ plants.",
     "How can I tell if I'm overwatering?", "Yellowing lower leaves, soggy soil, a musty smell and mushy stems are typical "
     "signs. Let the soil dry out and make sure the pot has drainage holes."),
    ("Can you explain what a VPN does?", "A VPN encrypts your internet traffic and sends it through a server elsewhere, so "
     "your network provider can't see the sites you visit and websites see the VPN's address instead of yours.",
     "Does it make me anonymous?", "Not completely. The VPN provider can still see your traffic, and sites can track you "
     "through accounts and cookies. It mainly protects you on untrusted networks like public Wi-Fi."),
    ("I'm trying to drink more water. Any tricks?", "Keep a bottle within reach, drink a glass with every meal, add lemon or "
     "cucumber for flavour, and use an app or marks on the bottle to track progress.",
     "How much should I actually drink?", "Needs vary with size, activity and climate; a common guide is about 2 to 3 litres "
     "a day from all drinks and food. Pale yellow urine is a simple sign you're getting enough."),
    ("What's a good beginner workout plan for strength?", "Three full-body sessions a week work well: squats, push-ups or "
     "bench press, rows, and a hinge like deadlifts, three sets of eight to twelve reps each.",
     "How fast should I increase the weights?", "Add a small amount when you can finish all sets with good form, often "
     "every week or two at first. Progress slows later, which is normal."),
    ("How do I write a good cover letter?", "Open with the role and why you're excited about it, connect two or three of your "
     "achievements to the job's needs, and close with a clear, polite call to action. Keep it under a page.",
     "Should I use the same letter for every application?", "Use a template for structure, but tailor the opening and the "
     "examples to each company. Recruiters notice generic letters quickly."),
    ("What board games are good for two players?", "Some favourites are Patchwork, Jaipur, 7 Wonders Duel, Lost Cities and "
     "Splendor. They are quick to learn and play in under an hour.",
     "Which one has the most strategy?", "7 Wonders Duel has the most depth of those: you balance military, science and "
     "economy while drafting from a shared pyramid of cards."),
    ("How can I improve my credit score?", "Pay every bill on time, keep credit card balances low relative to the limit, avoid "
     "opening many new accounts at once, and check your report for errors.",
     "How long does it take to see a change?", "Paying down balances can show up within a month or two; building a long record "
     "of on-time payments takes longer. Errors corrected on your report can help quickly."),
    ("Can you explain the rules of pickleball?", "Players serve underhand diagonally, the ball must bounce once on each side "
     "before volleys are allowed, and you can't volley inside the non-volley zone near the net, called the kitchen.",
     "How is scoring done?", "In traditional scoring only the serving side scores, games go to 11 and you must win by 2. "
     "In doubles, the score is called as three numbers: your score, the opponent's score and the server number."),
    ("What's a simple way to start meditating?", "Sit comfortably for five minutes, close your eyes and follow your breath. "
     "When your mind wanders, notice it and gently return to the breath. Guided apps can help at first.",
     "What time of day is best?", "Any time you can keep consistent. Many people like mornings before the day gets busy, "
     "but a short session before bed also works well."),
]

SESSION_GAP_DAYS = 11
START = datetime(2023, 1, 9, 9, 30)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y/%m/%d (%a) %H:%M")


def _session(user: str, assistant: str, follow: tuple[str, str], evidence: bool) -> list[dict]:
    first = {"role": "user", "content": user, **({"has_answer": True} if evidence else {})}
    return [first, {"role": "assistant", "content": assistant},
            {"role": "user", "content": follow[0]}, {"role": "assistant", "content": follow[1]}]


def record(k: int, item: tuple) -> dict:
    kind, early, late, question, answer, _ = item
    rng = random.Random(k)
    pool = rng.sample(range(len(DISTRACTORS)), 7)
    slots = ["d", "d", "early", "d", "d", "d", "late", "d", "d"]
    sessions, ids, dates = [], [], []
    start = START + timedelta(days=3 * k, hours=k % 5)
    for s, slot in enumerate(slots):
        when = start + timedelta(days=SESSION_GAP_DAYS * s, minutes=17 * s)
        if slot == "d":
            u1, a1, u2, a2 = DISTRACTORS[pool.pop()]
            sessions.append(_session(u1, a1, (u2, a2), False))
            ids.append(f"ku{k:02d}_noise_{s}")
        else:
            text = early if slot == "early" else late
            reply = ASSISTANT_REPLIES[rng.randrange(len(ASSISTANT_REPLIES))]
            sessions.append(_session(text, reply, FOLLOW_UPS[rng.randrange(len(FOLLOW_UPS))], True))
            ids.append(f"answer_ku{k:02d}_{slot}")
        dates.append(_fmt(when))
    asked = start + timedelta(days=SESSION_GAP_DAYS * len(slots) + 5)
    return {"question_id": f"ku_{k:02d}_{kind}", "question_type": "knowledge-update", "question": question,
            "answer": answer, "question_date": _fmt(asked), "haystack_session_ids": ids, "haystack_dates": dates,
            "haystack_sessions": sessions, "answer_session_ids": [f"answer_ku{k:02d}_early", f"answer_ku{k:02d}_late"]}


def main(path: str) -> None:
    data = [record(k, item) for k, item in enumerate(ITEMS, 1)]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(data)} knowledge-update questions, {sum(i[5] for i in ITEMS)} phrased without an obvious cue")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/longmemeval_knowledge_updates.json")
